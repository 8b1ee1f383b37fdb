"""One module per command: turn parsed options into a :class:`aicalc.result.Result`."""
