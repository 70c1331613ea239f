"""One module per vocabulary file format; ``load`` dispatches on the file's content."""
