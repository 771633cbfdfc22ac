"""`ascendfactory-cli submit`: hand an experiment to a cluster scheduler, which runs the same
`ascendfactory-cli train` on every node (each node's topology from `config.platforms`)."""
