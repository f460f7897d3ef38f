"""POS Lambda pipeline: speed, batch and serving layers over point-of-sale receipts."""
