"""Stand-in for ``bagua.torch_api.data_parallel``."""
