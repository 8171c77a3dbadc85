"""The generator's tests, in folders named after ``generator/stratgen``'s stages; the tests of
the whole pipeline (golden trees, conformance, properties, fuzzing) at the top."""
