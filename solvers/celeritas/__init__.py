"""Celeritas (Xu et al.): Standard Evaluation, CPD-TOPO, optimal operation fusion, Adjusting Placement."""
