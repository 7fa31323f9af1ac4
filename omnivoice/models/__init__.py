"""Graph builders, one file per model part; each reads like the math and knows nothing of files or numpy."""
