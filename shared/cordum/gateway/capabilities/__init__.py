"""Who the caller is and which acts its key may take (/api/v1/me): above the features,
whose checks it asks."""
