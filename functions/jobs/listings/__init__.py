"""Listings (seed 003): durable generation and publish batches over SQS, and their reclaimer."""
