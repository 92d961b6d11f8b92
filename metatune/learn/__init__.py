"""Training: configs, pretraining and MAML, checkpoints, the held-out evaluation, learning curves and
`make train-zoo`."""
