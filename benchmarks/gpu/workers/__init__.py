"""The checks of ``benchmarks.gpu``, each run in a fresh process."""
