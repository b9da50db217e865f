"""The end's hand-over (:class:`~dpa.engine.instructions.StopReducers` ``handover``): a
job whose keys may hold partial states on several reducers brings each key's states to its
owner under the final snapshot instead of the partitioned final merge
(:func:`~dpa.engine.output.end_by_handover`). Each reducer's loop end takes the keys it
does not own out of its state (:func:`take`); the runtime hands them to their owners with
the finalize calls, and each owner merges them first (:func:`merge`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dpa.aggregates.state import partial_hashes
from dpa.engine.instructions import StateMove


def take(logic: Any) -> list[StateMove]:
    """Takes the keys of ``logic``'s state (a :class:`~dpa.engine.reducer.ReducerLogic`
    asked for the hand-over at its stop, once every record is absorbed) that the final
    snapshot gives another owner (:meth:`~dpa.routing.policy.PolicySpec.owners`: one
    reducer per key, a split hot key's ring owner too) out of it: one
    :class:`~dpa.engine.instructions.StateMove` (``final``) per owner that gets keys. One
    lookup of the state's hashes; nothing for a state that holds only keys it owns. The
    open epochs are folded first: no checkpoint is taken after the stop (the coordinator
    drops a round under way), so a hand-over is outside the checkpoints' count of forwards.
    """
    if not logic.handover:
        return []
    logic._fold()
    snapshot, policy, me = logic.snapshot, logic.plan.policy, logic.reducer_id
    parts = logic.state.extract(lambda hashes: policy.owners(snapshot, hashes), me, logic.plan.num_reducers)
    moves = [StateMove(dest, partial, logic.closed, partial.num_rows if isinstance(partial, pa.Table) else len(partial),
                       snapshot.version, True) for dest, partial in parts]
    logic.keys_handed += sum(m.keys for m in moves)
    return moves


def merge(logic: Any, partials: tuple[Any, ...]) -> None:
    """Merges the partial states peers took out for ``logic``'s reducer (:func:`take`),
    noting the keys it held already (or got from another sender): their partial states
    merge here (counted by hash, as :func:`~dpa.aggregates.state.merged_hashes`)."""
    logic._fold()
    for partial in partials:
        both = np.intersect1d(partial_hashes(partial), logic.state.hashes())
        if len(both):
            logic.handover_merged = np.union1d(logic.handover_merged, both)
        logic.state.add_partial(partial)
