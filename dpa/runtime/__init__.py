"""Runtimes: they carry out what the engine's machines decide.

* :mod:`dpa.runtime.local` — in-process, in virtual time: the correctness oracle and the
  fault injector;
* :mod:`dpa.runtime.ray` — on Ray actors.
"""
