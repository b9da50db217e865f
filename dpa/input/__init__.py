"""Inputs: every source ``dpa.run`` accepts, as a stream of Arrow blocks.

* :mod:`dpa.input.sources` — the sources (tables, frames, Ray Datasets, parquet, iterables);
* :mod:`dpa.input.adapters` — inputs other packages hand over (the source registry);
* :mod:`dpa.input.records` — user records to Arrow tables and back;
* :mod:`dpa.engine.block_types` — types that change between blocks;
* :mod:`dpa.input.user_code` — map functions over whole batches.
"""
