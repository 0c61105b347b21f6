# SPDX-License-Identifier: MIT
# bash completion for sema: verbs, then each verb's options (read from its --help, so the
# completion never disagrees with the program). Installed by `make install`.
_sema() {
    local cur verb opts
    cur=${COMP_WORDS[COMP_CWORD]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$(sema help 2>/dev/null | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | sort -u) --help --version" -- "$cur"))
        return
    fi
    verb=${COMP_WORDS[1]}
    case $cur in
    -*)
        if [[ " ${COMP_WORDS[*]} " == *" --local "* ]]; then
            opts=$(sema "$verb" --local --help 2>/dev/null)
        else
            opts=$(sema "$verb" --help 2>/dev/null)
        fi
        COMPREPLY=($(compgen -W "$(grep -o -- '--[a-z][a-z0-9-]*' <<<"$opts" | sort -u) --local --help" -- "$cur"))
        ;;
    *)
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    esac
}
complete -F _sema sema
