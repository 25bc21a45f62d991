"""Cost model, one module per concern: flops, elementwise, compute, memory, comms, pipeline."""
