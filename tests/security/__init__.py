"""Delegated authentication, authorization and TLS: unit and integration tests."""
