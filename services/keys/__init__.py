"""Keys: KeyStores, trust anchors, the signer, DEK wrapping and key rotation."""
