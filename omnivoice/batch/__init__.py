"""Batch synthesis from a manifest: `python -m omnivoice.batch MANIFEST.jsonl -o OUTDIR`, locally or on Ray.

manifest  the JSONL manifest (the reference's omnivoice-infer-batch fields), every line checked up front
outputs   the output folder: whole files only, resume by what exists, failures.jsonl
ray       Ray actors (one per GPU, or --cpu-actors N) and a callable class for Ray Data's map_batches
__main__  the command line

Locally the items run through omnivoice.engine (many requests per LM step). With --ray every actor loads the
model once and runs the same engine on its share of the items; the driver writes every file, so outputs,
resuming and failure records are those of a local run.
"""
