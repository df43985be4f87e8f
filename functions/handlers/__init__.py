"""Thin Lambda entry points: decorators, parse, one call, return."""
