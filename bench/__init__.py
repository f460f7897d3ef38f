"""The benchmarks: every figure a ratio to a peer or a floor measured in the same run.

Run one from the checkout's root as a module, e.g. `python -m bench.speed_backlog --help`
(`make bench` runs them all, then `python -m bench.report`). Shared parts:

- `bench.results`: the results files in docs/bench/ (figures, goals, the machine);
- `bench.harness`: what the benchmarks repeat (their command line, alternating rounds
  and medians, the pipeline's commands as subprocesses and their environment, the speed
  layer as a process, its progress, the ledger check, the services' CPU, cleanup);
- `bench.revisions`: another git revision's code to measure beside this checkout's,
  in either layout the project has had (code at the root, or under src/pos_lambda).
"""
