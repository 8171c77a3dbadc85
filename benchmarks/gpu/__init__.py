"""The GPU check: stratlib's strategies, precisions and Lightning plugins trained on one GPU
(or, without one, the CPU) against hand-written loops; ``python -m benchmarks.gpu``.

``plan`` lists the checks, ``run`` runs them in fresh processes and ``report`` writes what
they found; the checks themselves are the modules of ``workers``.
"""
