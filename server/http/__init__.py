"""HTTP: routes, the request pipeline, content negotiation, conditional requests, XML."""
