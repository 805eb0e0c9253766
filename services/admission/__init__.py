"""Admission: the write side. Holds the signer and the tenants' public keys; never decrypts."""
