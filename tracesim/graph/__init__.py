"""The task graph: the contract between builders and the engine, and its files."""
