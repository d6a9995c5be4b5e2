# Sourced by the scripts: settings for running Open MPI here. Safe to source more than once.
if [[ $(id -u) -eq 0 ]]; then
  # Open MPI refuses to run as root unless told twice.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# The ofi component probes for fabrics at start-up (about a second) and is of no use on one machine.
export OMPI_MCA_btl=${OMPI_MCA_btl:-^ofi}
# More ranks than cores (a pair and a power rank on a 2-core machine) without --oversubscribe on
# every command line: Open MPI 5's mapper (PRRTE) reads this, as it does the option.
export PRTE_MCA_rmaps_default_mapping_policy=${PRTE_MCA_rmaps_default_mapping_policy:-:oversubscribe}
