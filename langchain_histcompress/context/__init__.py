"""Context assembly: the budgeted `ContextBuilder` and its cache-stable layout."""
