/*
 * sigint.so: lets sandq's R session driver (langs/session/r.R) put R's
 * SIGINT handling back after a cell, through .C("sandq_sigint_reset").
 *
 * Why: R's R_SelectEx (Sys.sleep, and every wait on input) installs a
 * temporary SIGINT handler that long-jumps out of select(), and right
 * after installing it calls the interrupt handler when an interrupt is
 * already pending. That call long-jumps to the cell's condition handler
 * without putting the old SIGINT handler back: the temporary one stays,
 * holding a jump buffer into a dead stack frame, and the next SIGINT
 * (the next cell's interrupt) jumps there: R dies of SIGINT or hangs. A
 * SIGINT that lands between a cell's last output and Sys.sleep's select()
 * does this; on a loaded machine it is seen every few dozen interrupts.
 *
 * The handler installed here is what R's own does: mark the interrupt
 * pending, for R to act on at its next check.
 */
#include <signal.h>
#include <string.h>

extern int R_interrupts_pending; /* R's, exported by libR */

static void on_sigint(int sig)
{
	(void)sig;
	R_interrupts_pending = 1;
}

/* sandq_sigint_reset installs on_sigint for SIGINT; drop also clears an
 * interrupt that is pending (one that came between cells). */
void sandq_sigint_reset(int *drop)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	if (*drop)
		R_interrupts_pending = 0;
}
