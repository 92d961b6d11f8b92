"""Search strategies for MetaSchedule: batch Bayesian optimisation (`batch_bo` over `bo`), gradient
search (`gradient`), and the online-adapted cost model they consult (`online_model`)."""
