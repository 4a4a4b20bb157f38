"""Catalog domains: code hosting, papers, weather, email, travel."""

from __future__ import annotations

from kairos.catalog._spec import Domain
from kairos.catalog._spec import ToolDef as T

CODE = Domain(
    "code",
    "Source code hosting and programming: GitHub repositories, issues, pull requests, commits, contributors, "
    "code search, and running small code snippets.",
    (
        T(
            "search_repositories",
            "Search GitHub for repositories by keywords and language, sorted by stars. Cannot read files.",
            (
                "query:str! Keywords, e.g. 'rust web framework'",
                "language:str Language filter, e.g. python",
                "limit:int=5 Results per page",
            ),
            ("repo", "description", "stars"),
            many=True,
        ),
        T(
            "get_repository_info",
            "Metadata of one GitHub repository: stars, forks, open issues, license, default branch.",
            ("repo:str! owner/name, e.g. pallets/flask",),
            ("stars", "forks_count", "open_issues_count", "license"),
        ),
        T(
            "list_repository_contributors",
            "Contributors of a GitHub repository with their commit counts. Use for contributor statistics.",
            ("repo:str! owner/name", "limit:int=10 Results per page"),
            ("login", "commits_count"),
            many=True,
        ),
        T(
            "list_issues",
            "Issues of a GitHub repository, filtered by state. Cannot change issues.",
            ("repo:str! owner/name", "state:enum(open,closed,all)=open Which issues", "limit:int=10 Results per page"),
            ("issue_number", "title", "labels", "created_at"),
            many=True,
        ),
        T(
            "create_issue",
            "Open a new issue in a GitHub repository with a title and body.",
            ("repo:str! owner/name", "title:str! Issue title", "body:str='' Details"),
            ("issue_number", "url"),
            effect=True,
        ),
        T(
            "get_pull_request",
            "Details of one pull request: title, author, status, changed files count, review state.",
            ("repo:str! owner/name", "number:int! Pull request number, e.g. 42"),
            ("title", "author", "state", "changed_files_count"),
        ),
        T(
            "list_commits",
            "Recent commits on a branch of a GitHub repository with messages and authors.",
            ("repo:str! owner/name", "branch:str=main Branch name", "limit:int=10 Results per page"),
            ("sha_id", "message", "author", "date"),
            many=True,
        ),
        T(
            "search_code",
            "Search source code across public GitHub repositories for a symbol or snippet.",
            (
                "query:str! Code or identifier, e.g. 'def parse_args'",
                "language:str Language filter",
                "limit:int=5 Results per page",
            ),
            ("repo", "path", "line_number"),
            many=True,
        ),
        T(
            "run_code_snippet",
            "Run a short Python or JavaScript snippet in an isolated interpreter and return stdout. Use for quick "
            "calculations or data processing. Cannot access the network or files.",
            ("language:enum(python,javascript)! Language", "code:str! The code to run"),
            ("stdout", "exit_code_number"),
        ),
    ),
)

PAPERS = Domain(
    "papers",
    "Academic research literature: search scientific papers on arXiv and Semantic Scholar, abstracts, citations, "
    "authors, download paper PDFs, format references.",
    (
        T(
            "search_arxiv",
            "Search arXiv preprints by keywords, newest first. Use for recent research papers. Cannot download "
            "the PDF (use download_paper_pdf).",
            ("query:str! Keywords, e.g. 'transformer attention'", "limit:int=5 Results per page"),
            ("paper_id", "title", "authors", "published_date"),
            many=True,
        ),
        T(
            "search_scholar",
            "Search peer-reviewed papers across journals and conferences with citation counts.",
            ("query:str! Keywords", "year_from:int Earliest year, e.g. 2020", "limit:int=5 Results per page"),
            ("paper_id", "title", "venue", "citation_count"),
            many=True,
        ),
        T(
            "get_paper_abstract",
            "Title, authors and abstract of one paper by its id.",
            ("paper_id:str! arXiv id or DOI, e.g. 1706.03762",),
            ("title", "authors", "abstract"),
        ),
        T(
            "get_paper_citations",
            "Papers that cite a given paper. Use to follow later work.",
            ("paper_id:str! arXiv id or DOI", "limit:int=10 Results per page"),
            ("paper_id", "title", "year_number"),
            many=True,
        ),
        T(
            "download_paper_pdf",
            "Download a paper's PDF into the user's paper library. Cannot summarise it.",
            ("paper_id:str! arXiv id or DOI, e.g. 2301.00001",),
            ("file_id", "size_bytes_count"),
            effect=True,
        ),
        T(
            "get_author_profile",
            "An academic author's affiliation, h-index and most cited papers.",
            ("name:str! Author name, e.g. 'Yoshua Bengio'",),
            ("affiliation", "h_index_number", "citation_count"),
        ),
        T(
            "format_citation",
            "Format a paper reference in a citation style such as APA, MLA or BibTeX.",
            ("paper_id:str! arXiv id or DOI", "style:enum(apa,mla,chicago,bibtex)=apa Citation style"),
            ("citation",),
        ),
        T(
            "get_trending_papers",
            "The most discussed new papers of the week in a research field.",
            ("field:str! e.g. 'machine learning'", "limit:int=5 Results per page"),
            ("paper_id", "title", "mentions_count"),
            many=True,
        ),
    ),
)

WEATHER = Domain(
    "weather",
    "Weather and climate: current conditions, temperature, rain, multi-day forecasts, hourly forecasts, air "
    "quality, UV index, severe weather alerts, sunrise and sunset, historical weather.",
    (
        T(
            "get_current_weather",
            "Current temperature, conditions, humidity and wind in a city. Use for 'what's the weather now'. "
            "Cannot forecast (use get_weather_forecast).",
            ("city:str! City name, e.g. London", "units:enum(metric,imperial)=metric Units"),
            ("temp_celsius", "conditions", "humidity_pct", "wind_kmh"),
        ),
        T(
            "get_weather_forecast",
            "Daily weather forecast for the next days in a city: highs, lows and chance of rain. Use for 'will it "
            "rain tomorrow'. Cannot give past weather.",
            ("city:str! City name, e.g. Paris", "days:int=3 Days ahead, 1 to 14"),
            ("date", "high_temp", "low_temp", "rain_probability"),
            many=True,
        ),
        T(
            "get_hourly_forecast",
            "Hour-by-hour forecast for the next 48 hours in a city.",
            ("city:str! City name", "hours:int=12 Hours ahead, up to 48"),
            ("time", "temp_celsius", "rain_probability"),
            many=True,
        ),
        T(
            "get_air_quality",
            "Air quality index and pollutant levels (PM2.5, ozone) in a city.",
            ("city:str! City name, e.g. Delhi",),
            ("aqi_number", "pm25_value", "category"),
        ),
        T(
            "get_uv_index",
            "Today's UV index and sunburn risk for a city.",
            ("city:str! City name",),
            ("uv_index_number", "risk"),
        ),
        T(
            "get_weather_alerts",
            "Active severe weather warnings (storms, floods, heat) for a region.",
            ("region:str! City, state or country",),
            ("event", "severity", "expires_at"),
            many=True,
        ),
        T(
            "get_sunrise_sunset",
            "Sunrise and sunset times for a city on a date.",
            ("city:str! City name", "date:date! Day, YYYY-MM-DD"),
            ("sunrise_time", "sunset_time"),
        ),
        T(
            "get_historical_weather",
            "Observed weather on a past date in a city. Cannot forecast.",
            ("city:str! City name", "date:date! Past day, YYYY-MM-DD"),
            ("high_temp", "low_temp", "precipitation_mm_value"),
        ),
    ),
)

EMAIL = Domain(
    "email",
    "The user's email mailbox: send, search, read, reply to and forward messages, drafts, labels, contacts "
    "and address book.",
    (
        T(
            "send_email",
            "Send a new email to one or more recipients. Use for 'email Bob that ...'. Cannot attach local files.",
            ("to:list! Recipient addresses", "subject:str! Subject line", "body:str! Message text"),
            ("message_id",),
            effect=True,
        ),
        T(
            "search_emails",
            "Search the user's mailbox by words, sender or date. Cannot search other people's mail.",
            ("query:str! e.g. 'from:alice invoice'", "limit:int=10 Results per page"),
            ("message_id", "sender", "subject", "received_at"),
            many=True,
        ),
        T(
            "read_email",
            "The full text of one email by its id (from search_emails). Cannot open attachments.",
            ("message_id:str! Id from search_emails",),
            ("sender", "subject", "body"),
        ),
        T(
            "reply_to_email",
            "Reply to an existing email thread. Use send_email for a new conversation.",
            ("message_id:str! Email to answer", "body:str! Reply text", "reply_all:bool=false Reply to everyone"),
            ("message_id",),
            effect=True,
        ),
        T(
            "forward_email",
            "Forward an existing email to other recipients with an optional note.",
            ("message_id:str! Email to forward", "to:list! Recipient addresses", "note:str='' Text above it"),
            ("message_id",),
            effect=True,
        ),
        T(
            "create_email_draft",
            "Save an email as a draft without sending it.",
            ("to:list! Recipient addresses", "subject:str! Subject", "body:str! Text"),
            ("draft_id",),
            effect=True,
        ),
        T(
            "label_email",
            "Add a label (folder tag) to an email, e.g. 'receipts'.",
            ("message_id:str! Email id", "label:str! Label name"),
            ("message_id", "labels"),
            effect=True,
        ),
        T(
            "lookup_contact",
            "Find a person in the user's address book: email, phone, company. Cannot search the web.",
            ("name:str! Person's name, e.g. 'Maria Lopez'",),
            ("email", "phone", "company"),
        ),
    ),
)

TRAVEL = Domain(
    "travel",
    "Trips and travel booking: search and book flights, hotels and rental cars, flight status, visa "
    "requirements, travel advisories, airport information.",
    (
        T(
            "search_flights",
            "Find flights between two airports on a date with prices. Use before book_flight. Cannot book.",
            (
                "origin:str! Departure airport code, e.g. SFO",
                "destination:str! Arrival airport code, e.g. JFK",
                "date:date! Departure day, YYYY-MM-DD",
                "passengers:int=1 Number of travellers",
            ),
            ("flight_id", "airline", "depart_time", "fare"),
            many=True,
        ),
        T(
            "book_flight",
            "Book a flight found by search_flights for the user. Charges the card on file.",
            ("flight_id:str! Id from search_flights", "passengers:int=1 Number of travellers"),
            ("booking_id", "total"),
            effect=True,
        ),
        T(
            "get_flight_status",
            "Live status of a flight by number: on time, delayed, gate, terminal.",
            ("flight_number:str! e.g. UA123", "date:date Day, YYYY-MM-DD"),
            ("status", "delay_minutes", "gate"),
        ),
        T(
            "search_hotels",
            "Find hotels in a city for given dates with nightly prices and ratings. Cannot book.",
            (
                "city:str! City, e.g. Rome",
                "check_in:date! Arrival day",
                "check_out:date! Departure day",
                "guests:int=1 Number of guests",
            ),
            ("hotel_id", "name", "nightly_price", "rating_score"),
            many=True,
        ),
        T(
            "book_hotel",
            "Reserve a room in a hotel found by search_hotels.",
            ("hotel_id:str! Id from search_hotels", "check_in:date! Arrival day", "check_out:date! Departure day"),
            ("booking_id", "total"),
            effect=True,
        ),
        T(
            "search_rental_cars",
            "Rental cars available at a location for a date range, with daily price.",
            ("location:str! City or airport", "pickup_date:date! Start day", "return_date:date! End day"),
            ("car_id", "model", "daily_price"),
            many=True,
        ),
        T(
            "check_visa_requirements",
            "Whether a citizen of one country needs a visa to visit another, and for how long.",
            ("citizenship:str! Passport country, e.g. India", "destination:str! Country to visit, e.g. Japan"),
            ("visa_required", "max_stay_days_count", "notes"),
        ),
        T(
            "get_travel_advisory",
            "Government safety advisory level and warnings for travelling to a country.",
            ("country:str! Destination country",),
            ("advisory_level_number", "summary"),
        ),
    ),
)

DOMAINS_B = (CODE, PAPERS, WEATHER, EMAIL, TRAVEL)
