"""Tests of `stratgen init`, `stratgen new` and the projects they make."""
