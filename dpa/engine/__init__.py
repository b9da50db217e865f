"""The engine: the state machines of a job's roles and the plan they share, plain Python.

* :mod:`dpa.engine.plan` — ``dpa.run``'s arguments as a validated, picklable plan;
* :mod:`dpa.engine.mapper`, :mod:`dpa.engine.reducer`, :mod:`dpa.engine.balancer`,
  :mod:`dpa.engine.coordinator` — one state machine per role;
* :mod:`dpa.engine.flow` — what mappers and reducers share (push outcomes, batch weights);
* :mod:`dpa.engine.instructions` — what the machines tell a runtime to do;
* :mod:`dpa.engine.epochs` — epochs, checkpoints and replay; :mod:`dpa.engine.elastic` —
  when an elastic job adds or retires a reducer; :mod:`dpa.engine.output` — what a runtime
  hands back.

The engine imports no runtime: :mod:`dpa.runtime` carries out what it decides.
"""
