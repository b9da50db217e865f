"""Fang et al.'s routing table over a hash: the policy (:mod:`.policy`) and its planning (:mod:`.plan`)."""
