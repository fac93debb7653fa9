"""Retrieval quality: labelled questions, BEIR sets, known items, and the model checks."""
