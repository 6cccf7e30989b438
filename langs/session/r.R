## sandq's session driver for R: an R console over cells.
##
## Protocol (see package langs/session, doc.go): commands "<nonce> <nbytes>\n" +
## code on fd 3, one JSON reply line per cell on fd 4, and the cell-end
## marker on fd 1 and fd 2 before each reply.
##
## A cell's expressions are evaluated one by one in .GlobalEnv; visible values
## are printed as the console would, except the last expression's, which is
## the cell's "text/plain" result (a ggplot is printed, so it draws). Plots go
## to a PNG device opened on first use in each cell (options(device)), closed
## after it; every page is an "image/png" result.
##
## Interrupts: the driver runs with interrupts suspended and allows them only
## while a cell's code runs, so SIGINT between cells stays pending; it is
## discarded before the next cell starts. After each cell, sigint.so (in the
## image) puts R's SIGINT handler back (see reset_sigint below).
##
## Base R has no JSON or base64 and the image has neither jsonlite nor
## base64enc, so both are written here.

local({
    ## fds 3 and 4, through /dev/fd when the job uid may open the pipes
    ## (they are root's otherwise); else through `cat` relays that ignore
    ## SIGINT and live as long as the driver.
    open_fd <- function(fd, mode, relay) {
        con <- suppressWarnings(tryCatch(
            file(sprintf("/dev/fd/%d", fd), open = mode, raw = TRUE),
            error = function(e) NULL))
        if (is.null(con)) con <- pipe(relay, open = mode)
        con
    }
    cmd <- open_fd(3L, "rb", "trap '' INT; exec cat <&3")
    out <- open_fd(4L, "wb", "trap '' INT; exec cat >&4")

    send <- function(line) {
        writeChar(paste0(line, "\n"), out, eos = NULL, useBytes = TRUE)
        flush(out)
    }

    read_exact <- function(n) {
        parts <- list()
        got <- 0
        while (got < n) {
            b <- readBin(cmd, "raw", n - got)
            if (length(b) == 0L) return(NULL)
            parts[[length(parts) + 1L]] <- b
            got <- got + length(b)
        }
        do.call(c, parts)
    }

    read_command <- function() {
        header <- raw(0)
        repeat {
            b <- readBin(cmd, "raw", 1L)
            if (length(b) == 0L) return(NULL)
            if (b == as.raw(10L)) break
            header <- c(header, b)
        }
        parts <- strsplit(rawToChar(header), " ", fixed = TRUE)[[1L]]
        n <- as.numeric(parts[2L])
        code <- if (n > 0) read_exact(n) else raw(0)
        if (is.null(code)) return(NULL)
        code <- rawToChar(code)
        Encoding(code) <- "UTF-8"
        list(nonce = parts[1L], code = code)
    }

    ## --- JSON and base64 -------------------------------------------------

    json_str <- function(s) {
        s <- enc2utf8(as.character(s))
        if (is.na(s)) return("null")
        if (!validUTF8(s)) s <- iconv(s, "UTF-8", "UTF-8", sub = "\ufffd")
        s <- gsub("\\", "\\\\", s, fixed = TRUE)
        s <- gsub("\"", "\\\"", s, fixed = TRUE)
        s <- gsub("\n", "\\n", s, fixed = TRUE)
        s <- gsub("\r", "\\r", s, fixed = TRUE)
        s <- gsub("\t", "\\t", s, fixed = TRUE)
        if (grepl("[\001-\037\177]", s, useBytes = TRUE)) {
            for (code in c(1:31, 127L)) {
                ch <- rawToChar(as.raw(code))
                s <- gsub(ch, sprintf("\\u%04x", code), s, fixed = TRUE, useBytes = TRUE)
            }
            Encoding(s) <- "UTF-8"
        }
        paste0("\"", s, "\"")
    }

    json_obj <- function(fields) {
        ## fields: a named list of already-encoded JSON values
        paste0("{", paste0(vapply(names(fields), json_str, ""), ":", unlist(fields), collapse = ","), "}")
    }

    b64_chars <- strsplit("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "")[[1L]]
    base64 <- function(r) {
        n <- length(r)
        if (n == 0L) return("")
        pad <- (3L - n %% 3L) %% 3L
        v <- c(as.integer(r), integer(pad))
        m <- matrix(v, nrow = 3L)
        w <- m[1L, ] * 65536L + m[2L, ] * 256L + m[3L, ]
        idx <- rbind(w %/% 262144L, (w %/% 4096L) %% 64L, (w %/% 64L) %% 64L, w %% 64L) + 1L
        chars <- b64_chars[idx]
        if (pad > 0L) chars[(length(chars) - pad + 1L):length(chars)] <- "="
        paste(chars, collapse = "")
    }

    ## --- plots -----------------------------------------------------------

    plot_root <- file.path(tempdir(), "sandq-cells")
    devices <- integer(0) # devices opened for the running cell

    use_plot_dir <- function(dir) {
        devices <<- integer(0)
        opened <- 0L
        options(device = function(...) {
            dir.create(dir, showWarnings = FALSE, recursive = TRUE)
            opened <<- opened + 1L
            grDevices::png(file.path(dir, sprintf("plot-%02d-%%03d.png", opened)),
                           width = 7, height = 5, units = "in", res = 120, type = "cairo")
            devices <<- c(devices, grDevices::dev.cur())
        })
    }

    collect_plots <- function(dir) {
        for (d in devices) {
            if (d %in% grDevices::dev.list()) try(grDevices::dev.off(d), silent = TRUE)
        }
        devices <<- integer(0)
        results <- list()
        for (f in sort(list.files(dir, pattern = "\\.png$", full.names = TRUE))) {
            size <- file.size(f)
            if (!is.na(size) && size > 0) {
                data <- readBin(f, "raw", size)
                results[[length(results) + 1L]] <- list("image/png" = base64(data))
            }
        }
        unlink(dir, recursive = TRUE)
        results
    }

    ## --- running a cell --------------------------------------------------

    show_value <- function(v) if (isS4(v)) methods::show(v) else print(v)

    format_call <- function(call) paste(deparse(call, width.cutoff = 200L, nlines = 1L), collapse = "")

    ## The cell's frames: after our eval, before the handler.
    cell_calls <- function(calls, base) {
        n <- length(calls)
        first <- base + 1L
        while (first <= n && !identical(calls[[first]], quote(eval(expr, envir = .GlobalEnv)))) first <- first + 1L
        last <- n - 1L # the handler's own frame
        if (last >= 1L && identical(calls[[last]][[1L]], quote(.handleSimpleError))) last <- last - 1L
        if (first + 1L > last) return(list())
        calls[(first + 1L):last]
    }

    count <- 0L

    run_cell <- function(code) {
        error <- NULL
        results <- list()
        value <- NULL
        calls <- list()
        base <- sys.nframe()
        plot_dir <- file.path(plot_root, sprintf("cell-%d", count))
        use_plot_dir(plot_dir)
        exprs <- tryCatch(parse(text = code, keep.source = FALSE, srcfile = NULL, encoding = "UTF-8"),
                          error = function(e) e)
        if (inherits(exprs, "error")) {
            msg <- sub("^(<text>:)?", sprintf("<cell %d>:", count), conditionMessage(exprs))
            error <- list(name = "parseError", value = msg, traceback = strsplit(msg, "\n", fixed = TRUE)[[1L]])
        } else {
            error <- tryCatch(
                allowInterrupts(withCallingHandlers({
                    n <- length(exprs)
                    for (i in seq_len(n)) {
                        expr <- exprs[[i]]
                        res <- withVisible(eval(expr, envir = .GlobalEnv))
                        if (!res$visible) next
                        if (i < n) {
                            show_value(res$value)
                        } else {
                            value <- paste(utils::capture.output(show_value(res$value)), collapse = "\n")
                        }
                    }
                    NULL
                }, error = function(e) calls <<- sys.calls())),
                interrupt = function(e) list(name = "interrupt", value = "interrupted by SIGINT", traceback = character(0)),
                error = function(e) {
                    cc <- cell_calls(calls, base)
                    call <- conditionCall(e)
                    head <- if (is.null(call)) "Error: " else paste0("Error in ", format_call(call), " : ")
                    list(name = class(e)[1L], value = conditionMessage(e),
                         traceback = c(vapply(cc, format_call, ""), paste0(head, conditionMessage(e))))
                })
        }
        results <- collect_plots(plot_dir)
        if (is.null(error) && !is.null(value) && nzchar(value)) {
            results[[length(results) + 1L]] <- list("text/plain" = value)
        }
        list(error = error, results = results)
    }

    ## A SIGINT that came while the driver waited or wrote is dropped here.
    drop_pending_interrupt <- function() {
        tryCatch(allowInterrupts({
            for (i in 1:2) NULL
            FALSE
        }), interrupt = function(e) TRUE)
    }

    ## sigint.so (langs/dockerfiles/r/sigint.c, in the image) puts R's SIGINT
    ## handling back after a cell: an interrupt that is pending when R's
    ## select() starts (Sys.sleep) leaves a handler behind that would crash
    ## R at the next SIGINT. With drop, it also clears a pending interrupt.
    ## Without the library (the host's R in tests), the R-level drop.
    sigint_so <- "/usr/lib/sandq/r/sigint.so"
    reset_sigint <- if (file.exists(sigint_so) && !is.null(tryCatch(dyn.load(sigint_so), error = function(e) NULL))) {
        function(drop) invisible(.C("sandq_sigint_reset", as.integer(drop)))
    } else {
        function(drop) if (drop) drop_pending_interrupt()
    }

    reply_json <- function(nonce, res) {
        fields <- list(nonce = json_str(nonce),
                       status = json_str(if (is.null(res$error)) "ok" else "error"),
                       execution_count = as.character(count))
        if (length(res$results) > 0L) {
            bundles <- vapply(res$results, function(b) json_obj(lapply(b, json_str)), "")
            fields$results <- paste0("[", paste(bundles, collapse = ","), "]")
        }
        if (!is.null(res$error)) {
            e <- res$error
            tb <- if (length(e$traceback)) paste0("[", paste(vapply(e$traceback, json_str, ""), collapse = ","), "]") else "[]"
            fields$error <- json_obj(list(name = json_str(e$name), value = json_str(e$value), traceback = tb))
        }
        json_obj(fields)
    }

    options(warn = 1L)
    suspendInterrupts({
        send("{\"ready\":true}")
        repeat {
            command <- read_command()
            if (is.null(command)) break
            count <- count + 1L
            reset_sigint(TRUE)
            res <- run_cell(command$code)
            reset_sigint(FALSE)
            try(flush(stdout()), silent = TRUE)
            marker <- paste0("\036sandq-cell-end:", command$nonce, "\036")
            try(cat(marker, file = stdout()), silent = TRUE)
            try(flush(stdout()), silent = TRUE)
            try(cat(marker, file = stderr()), silent = TRUE)
            send(reply_json(command$nonce, res))
        }
    })
    quit(save = "no", status = 0L, runLast = FALSE)
})
