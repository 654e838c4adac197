"""Training the GNN retriever (``r2a retriever train``) and measuring its reference offline (``r2a retriever
evaluate``): the config, the query sets built from held-out demos, the loop, the offline evaluation; retrieval at
run time is ``r2a/retrieval/``."""
