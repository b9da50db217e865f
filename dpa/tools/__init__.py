"""Tools around the library: the ``dpa`` command line (:mod:`dpa.tools.cli`), run reports
and figures (:mod:`dpa.tools.report`) and policy replay without Ray (:mod:`dpa.tools.simulate`)."""
