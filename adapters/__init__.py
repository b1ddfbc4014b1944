"""Backends behind the cosim contract: the SDK and one package per backend."""
