"""Program encodings for cost models: loop graphs (`loopgraph`), AutoTVM-style loop-context
features (`features`), the super-graph template every program is aligned onto (`supergraph`, data in
`template.json`), the node layout the encoder and the training batcher share (`layout`) and the
batched training tensors (`graphs`)."""
