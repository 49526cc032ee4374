"""The LSP front end: the pygls server, its handlers, and the standard-LSP mirrors of coven's
features. The only package that imports pygls' server side."""
