"""Which upstream attempts a request gets: model -> targets -> keys. No IO."""
