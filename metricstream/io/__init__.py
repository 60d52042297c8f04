"""Reading prediction files (CSV, TSV, Parquet, ``.npy``, ``.npz``) with bounded memory.

``readers.py`` streams a file into a confusion matrix with caps on record length, vocabulary
and classes.
"""
