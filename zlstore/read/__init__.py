"""Reading a runs tree: a cell's files, its values and its IR, without the store's derivations."""
