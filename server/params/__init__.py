"""Search-parameter types: how a declared parameter (string, token, reference, date, near) reads its value and
becomes SQL; ids, dates and materialized paths. The bottom layer beside server.declare."""
