"""The device driver's runners (``driver.DeviceBackend`` composes them, as its device's
capabilities pick them): planning, one chunk, the GPU's streams, the CPU's chunk workers,
streamed str batches, one text."""
