"""Tenancy: tenants, identities, principals, workareas and their policies."""
