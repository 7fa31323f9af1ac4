"""The ggml backend the tests run on: OMNIVOICE_TEST_BACKEND (default cpu), read in this one place."""

import os

BACKEND = os.environ.get("OMNIVOICE_TEST_BACKEND", "cpu")
