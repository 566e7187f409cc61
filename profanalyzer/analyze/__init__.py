"""The analysis stage: a trace (or a replayed compiled program) in, an Analysis out.

`attributed.Attributed` is the one context every stage takes (the trace, each
core's classified work, the kept steps and their table, the run's memo);
`analysis` builds it and calls the stages: exclusive attribution
(`attribution`), op groups and tables (`opgroups`, `opstats`), communication
overlap and SparseCore offload (`overlap`, `sparsecore`),
idle causes (`idle`), name scopes (`scopes`), run kind and workload
(`runkind`, `workload`), capture quality (`capture`), HBM (`memory`), host
planes (`hostplanes`), the compiler's expectation (`expected`), the
per-collective diagnosis (`collectives`), HLO anti-patterns (`antipatterns`),
kernel counters (`counters`) and source lines (`sourcelines`).

Imports point down only: the floor, the records, the inputs and classify.
Nothing here imports a rule, a renderer or an entry point.
"""
