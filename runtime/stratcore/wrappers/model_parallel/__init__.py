"""Model parallelism on a device mesh of named dimensions ('model_parallel').

- ``strategy``: ``ModelParallelStrategyBase``: the mesh, the user's ``parallelize_fn`` and FSDP2;
- ``parallel_dims``: the mesh's dimensions from the options (Lightning's two, or torchtitan's);
- ``pipeline``: pipeline parallelism through ``torch.distributed.pipelining``;
- ``pipeline_state``: checkpoints of pipelined models;
- ``context_parallel``: attention over a sequence split across processes.
"""
