"""Cost models: the GCN over super-graph encodings (`gcn`) and the XGBoost baselines over flat
features (`xgb`, `xgb_transfer`)."""
