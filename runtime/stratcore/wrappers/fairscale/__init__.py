"""fairscale's engines: ``fsdp`` (FullyShardedDataParallel, CUDA only) and ``oss`` (optimizer
state sharding with ShardedDataParallel). fairscale is imported only when a model is set up."""
