"""Stand-in for ``bagua.torch_api.algorithms``: Bagua's algorithms, registered by name as
Bagua registers them (``Algorithm.init(name, **kwargs)`` builds one)."""

from . import async_model_average, bytegrad, decentralized, gradient_allreduce, q_adam
from .base import Algorithm, AlgorithmImpl, GlobalAlgorithmRegistry

GlobalAlgorithmRegistry.register(
    "gradient_allreduce", gradient_allreduce.GradientAllReduceAlgorithm
)
GlobalAlgorithmRegistry.register("bytegrad", bytegrad.ByteGradAlgorithm)
GlobalAlgorithmRegistry.register("decentralized", decentralized.DecentralizedAlgorithm)
GlobalAlgorithmRegistry.register(
    "low_precision_decentralized", decentralized.LowPrecisionDecentralizedAlgorithm
)
GlobalAlgorithmRegistry.register("qadam", q_adam.QAdamAlgorithm)
GlobalAlgorithmRegistry.register("async", async_model_average.AsyncModelAverageAlgorithm)

__all__ = ["Algorithm", "AlgorithmImpl", "GlobalAlgorithmRegistry"]
