"""The engine: the state machines of a job's roles and the plan they share, plain Python.

* :mod:`dpa.engine.plan` — ``dpa.run``'s arguments as a validated, picklable plan;
* :mod:`dpa.engine.mapper_machine`, :mod:`dpa.engine.reducer_machine`, :mod:`dpa.engine.balancer`,
  :mod:`dpa.engine.coordinator_machine` — one state machine per role (over the data and
  bookkeeping of :mod:`dpa.engine.mapper`, :mod:`dpa.engine.reducer`,
  :mod:`dpa.engine.coordinator`); :mod:`dpa.engine.checkpoint_round` — one checkpoint;
* :mod:`dpa.engine.flow` — what mappers and reducers share (push outcomes, batch weights);
* :mod:`dpa.engine.events` — what happens to a role; :mod:`dpa.engine.instructions` — what
  the machines tell a runtime to do;
* :mod:`dpa.engine.epochs` — epochs, checkpoints and replay; :mod:`dpa.engine.elastic` —
  when an elastic job adds or retires a reducer; :mod:`dpa.engine.output` — what a runtime
  hands back.

The engine imports no runtime: :mod:`dpa.runtime` carries out what it decides.
"""
