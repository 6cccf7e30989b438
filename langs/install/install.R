# sandq library installer for R: Rscript install.R LIB REPO PKG...
# install.packages only warns when a package cannot be installed, so every
# package is loaded afterwards from LIB and any that fails ends the step
# with a non-zero exit: a failed install is never silent.
args <- commandArgs(trailingOnly = TRUE)
lib <- args[1]
repo <- args[2]
pkgs <- args[-(1:2)]
options(warn = 1, Ncpus = 1L)
dir.create(lib, recursive = TRUE, showWarnings = FALSE)
install.packages(pkgs, lib = lib, repos = repo, dependencies = c("Depends", "Imports", "LinkingTo"))
ok <- vapply(pkgs, function(p) {
  suppressWarnings(requireNamespace(p, lib.loc = c(lib, .libPaths()), quietly = TRUE))
}, logical(1))
if (!all(ok)) {
  message("sandq: not installed: ", paste(pkgs[!ok], collapse = ", "))
  quit(status = 1)
}
