"""The web layer: pages, the REST API, forms, the run page's websocket and snapshot, and how
figures are shown. It calls the domain packages; nothing below imports it."""
