"""Reliability under the user's own hand: Ctrl-C and kills at random moments."""
