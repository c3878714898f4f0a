"""The TauGrid kinds the operator reconciles: the TauCluster, TauWorkspaces and TauQuotaRequests."""
