"""Helpers for Attention from Scratch."""
