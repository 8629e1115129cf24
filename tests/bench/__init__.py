"""Tests of the benchmark harnesses in bench/."""
