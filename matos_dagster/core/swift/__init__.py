"""Swift: the store (the one client), every object name (layout), manifests, and finding what is archived."""
