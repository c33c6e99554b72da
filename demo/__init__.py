"""The demo: a stand-in upstream (``python -m demo.upstream``) and the catalog that
``make run`` loads against it. Used by the demo, the tests and the benchmarks; never
imported by the product."""
